// replaced by the cpu ops

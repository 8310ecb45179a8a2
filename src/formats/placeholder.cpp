// Replaced by the safetensors/npy/config sources.

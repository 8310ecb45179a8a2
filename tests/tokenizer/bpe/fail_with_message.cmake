# A CTest case that must fail, with the reason: a peer test whose tools are missing fails
# instead of silently skipping.
message(FATAL_ERROR "${MESSAGE}")

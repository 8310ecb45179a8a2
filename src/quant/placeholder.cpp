// replaced by fp8.cpp

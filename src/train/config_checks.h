// Range checks for run-config values: each error names the key, the value and the allowed
// range, e.g. "learning_rate = -1 is out of range (must be > 0)".
#pragma once

#include <string_view>

#include "core/check.h"

namespace fp8rl::config_checks {

template <class T>
void positive(std::string_view key, T value) {
  CHECK(value > T(0), "{} = {} is out of range (must be > 0)", key, value);
}

template <class T>
void at_least(std::string_view key, T value, T low) {
  CHECK(value >= low, "{} = {} is out of range (must be >= {})", key, value, low);
}

// low <= value < high
template <class T>
void in_half_open(std::string_view key, T value, T low, T high) {
  CHECK(value >= low && value < high, "{} = {} is out of range (must be in [{}, {}))", key, value,
        low, high);
}

// low <= value <= high
template <class T>
void in_closed(std::string_view key, T value, T low, T high) {
  CHECK(value >= low && value <= high, "{} = {} is out of range (must be in [{}, {}])", key, value,
        low, high);
}

// low < value < high
template <class T>
void in_open(std::string_view key, T value, T low, T high) {
  CHECK(value > low && value < high, "{} = {} is out of range (must be in ({}, {}))", key, value,
        low, high);
}

// low < value <= high
template <class T>
void in_left_open(std::string_view key, T value, T low, T high) {
  CHECK(value > low && value <= high, "{} = {} is out of range (must be in ({}, {}])", key, value,
        low, high);
}

}  // namespace fp8rl::config_checks

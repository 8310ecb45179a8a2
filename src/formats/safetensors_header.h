// Parsing and validation of a safetensors JSON header, apart from the file so that it can be
// tested and fuzzed on strings.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "formats/safetensors.h"

namespace fp8rl {

struct SafetensorsHeader {
  std::map<std::string, std::string> metadata;
  std::vector<SafetensorsTensorInfo> tensors;  // sorted by name
};

// Validates the header text against a data buffer of buffer_size bytes: JSON object, no
// duplicate keys at any depth, string->string __metadata__, entries of exactly dtype/shape/
// data_offsets, byte ranges matching shape x dtype, inside the buffer, not overlapping and
// covering it with no holes. Errors name `path` and the tensor.
SafetensorsHeader parse_safetensors_header(std::string_view text, size_t buffer_size,
                                           const std::string& path);

}  // namespace fp8rl

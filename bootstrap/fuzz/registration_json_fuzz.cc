// libFuzzer target: parse_registration on arbitrary bytes. A body it accepts must
// survive registration_to_json -> parse_registration unchanged.
#include <cstdlib>
#include <string_view>

#include "bootstrap/registration.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view body(reinterpret_cast<const char*>(data), size);
  std::string field;
  auto reg = pdkv::bootstrap::parse_registration(body, &field);
  if (!reg.ok()) {
    if (field.empty()) std::abort();  // every rejection names a field
    return 0;
  }
  auto again = pdkv::bootstrap::parse_registration(pdkv::bootstrap::registration_to_json(*reg));
  if (!again.ok() || !(*again == *reg)) std::abort();
  return 0;
}

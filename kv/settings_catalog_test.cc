#include "kv/settings_catalog.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace pdkv::kv {
namespace {

using config::SettingType;

// The catalog holds together on its own, so builds without Python (the sanitizer builds)
// check it too: pdkv.Config and docs/CONFIG.md are made from it.
TEST(SettingsCatalog, NamesAreUniqueAndEverySettingIsDocumented) {
  std::set<std::string> names;
  for (const SettingsSection& section : settings_catalog()) {
    EXPECT_FALSE(section.key.empty());
    EXPECT_FALSE(section.settings.empty()) << section.key;
    for (const config::SettingSpec* s : section.settings) {
      EXPECT_TRUE(names.insert(std::string(s->name)).second) << s->name << " listed twice";
      EXPECT_EQ(s->name.substr(0, 5), "PDKV_") << s->name;
      EXPECT_FALSE(s->help.empty()) << s->name << " has no help text";
    }
  }
}

TEST(SettingsCatalog, DefaultsLieInTheirRanges) {
  for (const SettingsSection& section : settings_catalog()) {
    for (const config::SettingSpec* s : section.settings) {
      switch (s->type) {
        case SettingType::kInt:
          EXPECT_LE(s->int_low, s->int_default) << s->name;
          EXPECT_LE(s->int_default, s->int_high) << s->name;
          break;
        case SettingType::kDouble:
          EXPECT_LE(s->double_low, s->double_default) << s->name;
          EXPECT_LE(s->double_default, s->double_high) << s->name;
          break;
        case SettingType::kBool: break;
        case SettingType::kString:
          if (s->choices.empty()) {
            EXPECT_FALSE(s->range_text.empty()) << s->name << ": free text needs its range text";
          } else {
            bool found = false;
            for (std::string_view c : s->choices) found = found || c == s->string_default;
            EXPECT_TRUE(found) << s->name << ": default is not one of its choices";
          }
          break;
      }
    }
  }
}

TEST(SettingsCatalog, ProcessWideSettingsAreThere) {
  std::set<std::string> process;
  for (const SettingsSection& section : settings_catalog()) {
    for (const config::SettingSpec* s : section.settings) {
      if (s->scope == config::SettingScope::kProcess) process.insert(std::string(s->name));
    }
  }
  for (const char* name : {"PDKV_LOG_LEVEL", "PDKV_CUDA_LIBRARY", "PDKV_CUDA_NO_BATCHED_COPIES",
                           "PDKV_FAULT_EVERY_N"}) {
    EXPECT_EQ(process.count(name), 1u) << name;
  }
  EXPECT_EQ(process.count("PDKV_SECRET_FILE"), 0u);
}

}  // namespace
}  // namespace pdkv::kv

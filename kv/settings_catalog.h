// Every PDKV_* setting pdkv declares (common/setting_spec.h), in the sections and order of
// docs/CONFIG.md's tables. pdkv.Config is made from the kManager ones (python/pdkv/config.py)
// and the tables from all of them (scripts/gen_config_docs.py); tests fail when either
// drifts. It sits in kv, the highest library layer, because it gathers the settings of
// every layer below.
#pragma once

#include <string_view>
#include <vector>

#include "common/setting_spec.h"

namespace pdkv::kv {

struct SettingsSection {
  std::string_view key;  // names the table in docs/CONFIG.md's marker comments
  std::vector<const config::SettingSpec*> settings;
};

// Fixed at compile time; the same object on every call.
const std::vector<SettingsSection>& settings_catalog();

}  // namespace pdkv::kv

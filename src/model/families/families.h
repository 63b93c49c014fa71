#pragma once
// The families the registry (family.cpp) lists, one file each.

#include "../family.h"

namespace moe::model {

extern const Family kMixtral;
extern const Family kQwen2Moe;
extern const Family kQwen3Moe;
extern const Family kOlmoe;
extern const Family kDeepseekV2;
extern const Family kDeepseekV3;

}  // namespace moe::model

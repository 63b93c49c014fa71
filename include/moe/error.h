#pragma once
// moe::Error, what every library call throws for bad input: it names the thing and the fix.

#include "moe/core/check.h"  // IWYU pragma: export

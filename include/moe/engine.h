#pragma once
// The engine: load a model directory, submit requests, step, read results and statistics.

#include "moe/engine/engine.h"  // IWYU pragma: export
#include "moe/engine/generation.h"  // IWYU pragma: export

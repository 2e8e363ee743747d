// sdm/sdm.hpp - umbrella header of the sdm C++ library.
#pragma once

#include "sdm/error.hpp"
#include "sdm/ops.hpp"
#include "sdm/options.hpp"
#include "sdm/plan.hpp"
#include "sdm/product_key_topk.hpp"
#include "sdm/reference.hpp"
#include "sdm/types.hpp"

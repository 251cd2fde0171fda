// Everything in autograd/ (and core/), for convenience.
#pragma once
#include "autograd/anomaly.h"
#include "autograd/engine.h"
#include "autograd/gradcheck.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "autograd/recompute.h"
#include "autograd/var.h"
#include "core/qkv_core.h"

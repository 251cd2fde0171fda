// Everything in core/, for convenience.
#pragma once
#include "core/allocator.h"
#include "core/blas.h"
#include "core/elementwise.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/layout.h"
#include "core/matmul.h"
#include "core/parallel.h"
#include "core/real.h"
#include "core/reduce.h"
#include "core/shape.h"
#include "core/tensor.h"

// The Transformer of "Attention Is All You Need" and its relatives, all
// made of the same layers. One include for programs; the models live in
//   nn/tokens.h           Tokens: a batch of token ids with their lengths
//   models/encoder_decoder.h  encoder and decoder layers and stacks, the encoder-decoder model (the
//   paper's) models/gpt.h              the decoder-only (GPT-style) language model
//   models/encoder_only.h     the encoder-only token model
//   models/vit.h              the Vision Transformer (images in patches, a class token)
#pragma once
#include "models/encoder_decoder.h"
#include "models/encoder_only.h"
#include "models/gpt.h"
#include "models/vit.h"
#include "nn/tokens.h"

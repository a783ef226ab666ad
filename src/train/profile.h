/* The profile of a run (`anvil train --profile DIR`): the kernel table the
 * model and optimizer use while profiling, each call a span named for its
 * op (and, for the linear layers, their role in the block). */
#ifndef ANVIL_TRAIN_PROFILE_H
#define ANVIL_TRAIN_PROFILE_H

#include "kernels/kernels.h"
#include "model/model.h"

/* A table that calls k's functions, recording a span for each call while a profile is on (an
 * indirect call and a relaxed load more per call when not), the linear layers named for their
 * role in model's block. One per process: a later call replaces
 * the kernels the table calls. Memory functions are k's own, so buffers allocated through either
 * table are the same. */
const anvil_kernels *anvil_profiled_kernels(const anvil_kernels *k, const anvil_model_config *model);

#endif

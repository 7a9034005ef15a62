#pragma once
#warning "noisy header"
#include <torch/torch.h>

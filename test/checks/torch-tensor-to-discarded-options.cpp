// ExtraConversionMethods: further copy-returning tensor methods.
// RUN: %check_torch_tidy %s torch-tensor-to-discarded %t
// RUN: %check_torch_tidy -check-suffix=OPT %s torch-tensor-to-discarded %t \
// RUN:   -- --config="{CheckOptions: {torch-tensor-to-discarded.ExtraConversionMethods: 'relu;sigmoid'}}"

#include <torch/torch.h>

void activations(torch::Tensor x) {
  x.relu();
  // CHECK-MESSAGES-OPT: :[[@LINE-1]]:3: warning: result of 'x.relu()' is discarded; tensor conversions return a new tensor and leave 'x' unchanged; only Module::to moves in place [torch-tensor-to-discarded]
  // CHECK-FIXES-OPT: {{^}}  x = x.relu();{{$}}
  x.sigmoid();
  // CHECK-MESSAGES-OPT: :[[@LINE-1]]:3: warning: result of 'x.sigmoid()' is discarded
  // CHECK-FIXES-OPT: {{^}}  x = x.sigmoid();{{$}}
  x.cuda();
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: result of 'x.cuda()' is discarded
  // CHECK-FIXES: {{^}}  x = x.cuda();{{$}}
  // CHECK-MESSAGES-OPT: :[[@LINE-3]]:3: warning: result of 'x.cuda()' is discarded
  // CHECK-FIXES-OPT: {{^}}  x = x.cuda();{{$}}
  x.sum();
  // CHECK-FIXES: {{^}}  x.sum();{{$}}
}

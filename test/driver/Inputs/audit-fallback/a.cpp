#include <unguarded.h>
void a(at::Tensor t) { t.cuda(); }

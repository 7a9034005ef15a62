#include "loop-header.h"
void one() { header_loop(); }

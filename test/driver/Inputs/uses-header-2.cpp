#include "loop-header.h"
void two() { header_loop(); }

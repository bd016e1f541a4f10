#include "support/reference.h"

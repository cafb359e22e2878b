#include "textflag.h"

// func trap()
TEXT ·trap(SB), NOSPLIT, $0-0
	UNDEF
	RET

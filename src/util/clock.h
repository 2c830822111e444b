/* Wall-clock seconds for timing (monotonic: never jumps with the date). */
#ifndef LB_UTIL_CLOCK_H
#define LB_UTIL_CLOCK_H

double lb__now(void);

#endif

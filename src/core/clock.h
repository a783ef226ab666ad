/* Monotonic wall-clock time, for step timing and ETAs. */
#ifndef ANVIL_CORE_CLOCK_H
#define ANVIL_CORE_CLOCK_H

double anvil_now(void); /* seconds since an arbitrary fixed point */
/* Sleeps the whole of seconds (<= 0: not at all), going back to sleep after a signal handler ran. */
void anvil_sleep(double seconds);

#endif

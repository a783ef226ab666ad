/* Time: monotonic, for step timing and ETAs; and since the Unix epoch, for
 * timestamps that other processes (the job service) line up with theirs. */
#ifndef ANVIL_CORE_CLOCK_H
#define ANVIL_CORE_CLOCK_H

double anvil_now(void); /* seconds since an arbitrary fixed point */
double anvil_epoch_now(void); /* seconds since the Unix epoch (CLOCK_REALTIME) */
/* Sleeps the whole of seconds (<= 0: not at all), going back to sleep after a signal handler ran. */
void anvil_sleep(double seconds);

#endif

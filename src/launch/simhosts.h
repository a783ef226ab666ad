/* Simulated hosts: network namespaces of this machine that stand in for the hosts of a multi-host
 * job, so that its ranks talk over a network that can be cut (anvil chaos net-cut), which loopback
 * never shows. The job service makes them (anvil serve --sim-hosts N; root only).
 *
 * Host k (0-based) is the network namespace anvil-<T>-<k>: its interface eth0 holds 10.X.Y.<k+1>/24
 * and is one end of a veth pair whose other end, av<T>h<k> in the daemon's namespace, is a port of
 * the bridge av<T>br (10.X.Y.254/24, which mpirun's own daemon reaches the hosts through). T (6 hex
 * digits) and X.Y come from a hash of the state folder's path, so two daemons' hosts do not meet.
 * Cutting host k off the network sets av<T>h<k> down: its packets go nowhere, and TCP between its
 * ranks and the others' stalls (no error: retransmits), as when a switch port fails.
 *
 * mpirun reaches host k through its rsh agent, `anvil sim-host-rsh anvil-<T> [ssh options] ADDRESS
 * COMMAND...`, which enters the namespace of the host whose address ADDRESS is and runs COMMAND (the
 * words joined, as ssh does) with /bin/sh there. The processes stay in the caller's session and mount
 * namespace: the run folder is shared, and the local backend finds and kills them as on one host. */
#ifndef ANVIL_LAUNCH_SIMHOSTS_H
#define ANVIL_LAUNCH_SIMHOSTS_H

#include <stdbool.h>
#include <stddef.h>

#define ANVIL_SIMHOSTS_MAX 64

typedef struct {
    int n;                /* 0: none */
    unsigned tag;         /* T: 24 bits */
    unsigned char net[2]; /* X.Y of the subnet 10.X.Y.0/24 */
} anvil_simhosts;

/* The names of n hosts for the state folder at state_dir (an absolute path); nothing is made. */
void anvil_simhosts_init(anvil_simhosts *s, const char *state_dir, int n);
/* Makes the hosts, or keeps those that a daemon of the same state folder killed before left whole
 * (*kept true: the attempts that outlived it keep their network); hosts of this T past n are removed.
 * 0, or -1 after anvil_fail (what ip said: it needs root). */
int anvil_simhosts_up(const anvil_simhosts *s, bool *kept);
/* Removes every namespace, veth and bridge of this T (whatever is missing is no error). */
void anvil_simhosts_down(const anvil_simhosts *s);

/* Host k's namespace, its end of the link in the daemon's namespace, its address; the prefix of the
 * namespaces' names (the rsh agent's first argument); the subnet as 10.X.Y.0/24. */
void anvil_simhosts_netns(const anvil_simhosts *s, int k, char *name, size_t cap);
void anvil_simhosts_link(const anvil_simhosts *s, int k, char *name, size_t cap);
void anvil_simhosts_addr(const anvil_simhosts *s, int k, char *addr, size_t cap);
void anvil_simhosts_prefix(const anvil_simhosts *s, char *prefix, size_t cap);
void anvil_simhosts_subnet(const anvil_simhosts *s, char *cidr, size_t cap);

/* Sets a link (a host's end on the bridge) up or down: 0, 1 when there is no such link (its hosts
 * were removed), or -1 after anvil_fail. */
int anvil_simhosts_set_link(const char *link, bool up);

/* The rsh agent: enters the namespace prefix-<k> of the host at address (10.X.Y.<k+1>) and replaces
 * this process with /bin/sh -c command. Returns only on failure: -1 after anvil_fail. */
int anvil_simhosts_rsh(const char *prefix, const char *address, const char *command);

#endif

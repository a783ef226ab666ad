#include "core/suggest.h"

#include <stdlib.h>
#include <string.h>

/* Optimal string alignment distance; cap + 1 for words that differ in length by more than cap
 * (past the cap the exact figure does not matter) or are longer than any name is. */
static int distance(const char *a, const char *b, int cap) {
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (abs(la - lb) > cap || la > 64 || lb > 64) return cap + 1;
    int d[65][65];
    for (int i = 0; i <= la; i++) d[i][0] = i;
    for (int j = 0; j <= lb; j++) d[0][j] = j;
    for (int i = 1; i <= la; i++)
        for (int j = 1; j <= lb; j++) {
            int sub = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            int del = d[i - 1][j] + 1, ins = d[i][j - 1] + 1;
            int v = sub < del ? sub : del;
            v = v < ins ? v : ins;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    return d[la][lb];
}

const char *anvil_suggest(const char *word, const char *const *names, int n) {
    const char *best = NULL;
    int best_d = 0;
    for (int i = 0; i < n; i++) {
        int la = (int)strlen(word), lb = (int)strlen(names[i]);
        int cap = (la > lb ? la : lb) / 3;
        if (cap < 1) cap = 1;
        int d = distance(word, names[i], cap);
        if (d <= cap && d > 0 && (!best || d < best_d)) best = names[i], best_d = d;
    }
    return best;
}

/* "Did you mean ...?": the known name nearest to a misspelt one. */
#ifndef ANVIL_CORE_SUGGEST_H
#define ANVIL_CORE_SUGGEST_H

/* Of the n names, the one nearest to word by edit distance (insertions, deletions, substitutions
 * and swaps of adjacent characters, each 1), when it is near enough to be a typo: at most a third
 * of the longer one's length apart (at least 1). NULL when none is, or word is one of them; ties
 * go to the earlier name. */
const char *anvil_suggest(const char *word, const char *const *names, int n);

#endif

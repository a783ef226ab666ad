#include "core/json.h"

#include <pthread.h>
#include <string.h>

static pthread_mutex_t parse_lock = PTHREAD_MUTEX_INITIALIZER;

cJSON *anvil_json_parse(const char *text, size_t len, const char **end) {
    const char *stop = NULL;
    pthread_mutex_lock(&parse_lock);
    cJSON *j = cJSON_ParseWithLengthOpts(text, len, &stop, 0);
    pthread_mutex_unlock(&parse_lock);
    if (end) *end = stop;
    return j;
}

cJSON *anvil_json_parse_str(const char *text) { return text ? anvil_json_parse(text, strlen(text) + 1, NULL) : NULL; }

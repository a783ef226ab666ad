#include "job/auth.h"

#include <ctype.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/error.h"
#include "core/json.h"
#include "job/store_internal.h"

#define HASH_BYTES 32
#define SECRET_BYTES 32
#define ID_BYTES (ANVIL_TOKEN_ID_LEN / 2)

static int sodium_ready(void) { return sodium_init() < 0 ? anvil_fail("libsodium could not be initialized") : 0; }

/* A token's hash. BLAKE2b (crypto_generichash), not a password hash (crypto_pwhash): a slow,
 * memory-hard hash makes guessing a low-entropy password expensive, but a token's 256 random bits
 * cannot be guessed at any speed, so the slowness would only be paid on every API call (and
 * handed to anyone who sends tokens). The hash covers the whole token, its ID included. */
static void token_hash(const char *token, unsigned char hash[HASH_BYTES]) {
    crypto_generichash(hash, HASH_BYTES, (const unsigned char *)token, strlen(token), NULL, 0);
}

static bool hex_digits(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isdigit((unsigned char)s[i]) && !(s[i] >= 'a' && s[i] <= 'f')) return false;
    return true;
}

static sqlite3_stmt *prepare(anvil_store *st, const char *sql) {
    sqlite3_stmt *s = NULL;
    if (sqlite3_prepare_v2(st->db, sql, -1, &s, NULL) != SQLITE_OK) {
        anvil_store_db_fail(st, "prepare");
        sqlite3_finalize(s);
        return NULL;
    }
    return s;
}

/* Whether sql with the text parameter a yields a row: 1, 0, or -1. */
static int exists(anvil_store *st, const char *sql, const char *a) {
    sqlite3_stmt *s = prepare(st, sql);
    if (!s) return -1;
    sqlite3_bind_text(s, 1, a, -1, SQLITE_STATIC);
    int rc = sqlite3_step(s);
    sqlite3_finalize(s);
    return rc == SQLITE_ROW ? 1 : rc == SQLITE_DONE ? 0 : anvil_store_db_fail(st, "read");
}

static int refused(char *why, size_t cap, const char *reason) {
    snprintf(why, cap, "%s", reason);
    return 1;
}

int anvil_auth_check(anvil_store *st, const char *authorization, anvil_principal *who, char *why, size_t cap) {
    memset(who, 0, sizeof *who);
    if (!authorization) return refused(why, cap, "no Authorization header");
    if (strncasecmp(authorization, "Bearer ", 7))
        return refused(why, cap, "the Authorization header is not 'Bearer <token>'");
    const char *t = authorization + 7;
    while (*t == ' ') t++;
    size_t n = strlen(t);
    while (n && t[n - 1] == ' ') n--;
    if (n != ANVIL_TOKEN_SIZE - 1 || strncmp(t, "anv_", 4) || t[4 + ANVIL_TOKEN_ID_LEN] != '_' ||
        !hex_digits(t + 4, ANVIL_TOKEN_ID_LEN) || !hex_digits(t + 5 + ANVIL_TOKEN_ID_LEN, 64))
        return refused(why, cap, "not an anvil token (anv_<16 hex digits>_<64 hex digits>)");
    char token[ANVIL_TOKEN_SIZE];
    memcpy(token, t, n);
    token[n] = 0;
    memcpy(who->token_id, token + 4, ANVIL_TOKEN_ID_LEN);
    who->token_id[ANVIL_TOKEN_ID_LEN] = 0;
    if (sodium_ready()) return -1;
    unsigned char hash[HASH_BYTES];
    token_hash(token, hash);
    sodium_memzero(token, sizeof token);
    pthread_mutex_lock(&st->lock);
    sqlite3_stmt *s = prepare(st, "SELECT t.user, t.hash, t.revoked_at, u.admin FROM tokens t JOIN users u"
                                  " ON u.name = t.user WHERE t.id = ?1");
    int rc = -1;
    if (s) {
        sqlite3_bind_text(s, 1, who->token_id, -1, SQLITE_STATIC);
        int step = sqlite3_step(s);
        if (step == SQLITE_DONE) {
            rc = refused(why, cap, "unknown token");
        } else if (step != SQLITE_ROW) {
            anvil_store_db_fail(st, "tokens");
        } else if (sqlite3_column_bytes(s, 1) != HASH_BYTES ||
                   sodium_memcmp(sqlite3_column_blob(s, 1), hash, HASH_BYTES)) {
            rc = refused(why, cap, "wrong secret for this token ID");
        } else if (sqlite3_column_double(s, 2) > 0) {
            rc = refused(why, cap, "revoked token");
        } else {
            rc = 0;
            snprintf(who->user, sizeof who->user, "%s", (const char *)sqlite3_column_text(s, 0));
            who->admin = sqlite3_column_int(s, 3) != 0;
        }
    }
    sqlite3_finalize(s);
    pthread_mutex_unlock(&st->lock);
    return rc;
}

int anvil_auth_user_count(anvil_store *st, int *n) {
    pthread_mutex_lock(&st->lock);
    sqlite3_stmt *s = prepare(st, "SELECT COUNT(*) FROM users");
    int rc = s && sqlite3_step(s) == SQLITE_ROW ? 0 : -1;
    if (!rc) *n = sqlite3_column_int(s, 0);
    else if (s) anvil_store_db_fail(st, "users");
    sqlite3_finalize(s);
    pthread_mutex_unlock(&st->lock);
    return rc;
}

/* Makes a token for user, stores its hash and appends the audit entry (with the token's ID as its
 * detail when the entry has none); inside a transaction. */
static int insert_token(anvil_store *st, const char *user, const anvil_audit_entry *audit,
                        char token[ANVIL_TOKEN_SIZE]) {
    if (sodium_ready()) return -1;
    unsigned char id[ID_BYTES], secret[SECRET_BYTES], hash[HASH_BYTES];
    char idhex[ANVIL_TOKEN_ID_LEN + 1], sechex[2 * SECRET_BYTES + 1];
    randombytes_buf(id, sizeof id);
    randombytes_buf(secret, sizeof secret);
    sodium_bin2hex(idhex, sizeof idhex, id, sizeof id);
    sodium_bin2hex(sechex, sizeof sechex, secret, sizeof secret);
    snprintf(token, ANVIL_TOKEN_SIZE, "anv_%s_%s", idhex, sechex);
    sodium_memzero(secret, sizeof secret);
    sodium_memzero(sechex, sizeof sechex);
    token_hash(token, hash);
    sqlite3_stmt *s = prepare(st, "INSERT INTO tokens (id, user, hash, created_at) VALUES (?1, ?2, ?3, ?4)");
    if (!s) return -1;
    sqlite3_bind_text(s, 1, idhex, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, user, -1, SQLITE_STATIC);
    sqlite3_bind_blob(s, 3, hash, HASH_BYTES, SQLITE_STATIC);
    sqlite3_bind_double(s, 4, anvil_store_now());
    int rc = sqlite3_step(s);
    sqlite3_finalize(s);
    if (rc != SQLITE_DONE) return anvil_store_db_fail(st, "tokens");
    anvil_audit_entry e = *audit;
    char detail[64];
    snprintf(detail, sizeof detail, "token %s", idhex);
    if (!e.detail || !e.detail[0]) e.detail = detail;
    return anvil_audit_insert(st, &e);
}

static int add_user(anvil_store *st, const char *name, bool admin, bool only_first, const anvil_audit_entry *audit,
                    char token[ANVIL_TOKEN_SIZE]) {
    int rc = exists(st, only_first ? "SELECT 1 FROM users WHERE ?1 IS NOT NULL" : "SELECT 1 FROM users WHERE name = ?1",
                    name);
    if (rc) return rc;
    sqlite3_stmt *s = prepare(st, "INSERT INTO users (name, admin, created_at) VALUES (?1, ?2, ?3)");
    if (!s) return -1;
    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_int(s, 2, admin);
    sqlite3_bind_double(s, 3, anvil_store_now());
    rc = sqlite3_step(s);
    sqlite3_finalize(s);
    if (rc != SQLITE_DONE) return anvil_store_db_fail(st, "users");
    return insert_token(st, name, audit, token);
}

int anvil_auth_add_user(anvil_store *st, const char *name, bool admin, const anvil_audit_entry *audit,
                        char token[ANVIL_TOKEN_SIZE]) {
    int rc;
    IN_TRANSACTION(st, rc, rc = add_user(st, name, admin, false, audit, token));
    return rc;
}

int anvil_auth_init(anvil_store *st, const char *name, char token[ANVIL_TOKEN_SIZE]) {
    anvil_audit_entry e = {.user = name, .action = "serve.init", .target = name, .result = 201};
    int rc;
    IN_TRANSACTION(st, rc, rc = add_user(st, name, true, true, &e, token));
    return rc;
}

static int add_token(anvil_store *st, const char *user, const anvil_audit_entry *audit, char token[ANVIL_TOKEN_SIZE]) {
    int rc = exists(st, "SELECT 1 FROM users WHERE name = ?1", user);
    if (rc <= 0) return rc < 0 ? -1 : 1;
    return insert_token(st, user, audit, token);
}

int anvil_auth_add_token(anvil_store *st, const char *user, const anvil_audit_entry *audit,
                         char token[ANVIL_TOKEN_SIZE]) {
    int rc;
    IN_TRANSACTION(st, rc, rc = add_token(st, user, audit, token));
    return rc;
}

static int revoke(anvil_store *st, const char *id, const anvil_audit_entry *audit, char **user) {
    sqlite3_stmt *s = prepare(st, "SELECT t.user, t.revoked_at, u.admin, (SELECT COUNT(*) FROM tokens t2 JOIN users u2"
                                  " ON u2.name = t2.user WHERE u2.admin AND t2.revoked_at = 0 AND t2.id != ?1)"
                                  " FROM tokens t JOIN users u ON u.name = t.user WHERE t.id = ?1");
    if (!s) return -1;
    sqlite3_bind_text(s, 1, id, -1, SQLITE_STATIC);
    int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        *user = anvil_store_column_text(s, 0);
        if (!*user) rc = anvil_fail("out of memory");
        else if (sqlite3_column_double(s, 1) > 0) rc = 2;
        else if (sqlite3_column_int(s, 2) && sqlite3_column_int(s, 3) == 0) rc = 3;
        else rc = 0;
    } else {
        rc = rc == SQLITE_DONE ? 1 : anvil_store_db_fail(st, "tokens");
    }
    sqlite3_finalize(s);
    if (rc) return rc;
    s = prepare(st, "UPDATE tokens SET revoked_at = ?2 WHERE id = ?1");
    if (!s) return -1;
    sqlite3_bind_text(s, 1, id, -1, SQLITE_STATIC);
    sqlite3_bind_double(s, 2, anvil_store_now());
    rc = sqlite3_step(s);
    sqlite3_finalize(s);
    if (rc != SQLITE_DONE) return anvil_store_db_fail(st, "tokens");
    anvil_audit_entry e = *audit;
    char detail[100];
    snprintf(detail, sizeof detail, "of user %s", *user);
    if (!e.detail || !e.detail[0]) e.detail = detail;
    return anvil_audit_insert(st, &e);
}

int anvil_auth_revoke(anvil_store *st, const char *id, const anvil_audit_entry *audit, char **user) {
    *user = NULL;
    int rc;
    IN_TRANSACTION(st, rc, rc = revoke(st, id, audit, user));
    if (rc) {
        free(*user);
        *user = NULL;
    }
    return rc;
}

/* The first column of sql's rows (text parameter a) as a JSON array of strings. */
static cJSON *column_array(anvil_store *st, const char *sql, const char *a) {
    sqlite3_stmt *s = prepare(st, sql);
    cJSON *arr = s ? cJSON_CreateArray() : NULL;
    if (!arr) {
        sqlite3_finalize(s);
        return NULL;
    }
    sqlite3_bind_text(s, 1, a, -1, SQLITE_STATIC);
    int step;
    while ((step = sqlite3_step(s)) == SQLITE_ROW)
        if (!cJSON_AddItemToArray(arr, cJSON_CreateString((const char *)sqlite3_column_text(s, 0)))) break;
    sqlite3_finalize(s);
    if (step != SQLITE_DONE) {
        cJSON_Delete(arr);
        anvil_fail("state database: cannot list");
        return NULL;
    }
    return arr;
}

static cJSON *user_tokens(anvil_store *st, const char *user) {
    sqlite3_stmt *s = prepare(st, "SELECT id, created_at, revoked_at FROM tokens WHERE user = ?1 ORDER BY created_at");
    cJSON *arr = s ? cJSON_CreateArray() : NULL;
    if (!arr) {
        sqlite3_finalize(s);
        return NULL;
    }
    sqlite3_bind_text(s, 1, user, -1, SQLITE_STATIC);
    int step;
    while ((step = sqlite3_step(s)) == SQLITE_ROW) {
        cJSON *t = cJSON_CreateObject();
        if (!t || !cJSON_AddItemToArray(arr, t)) {
            cJSON_Delete(t);
            break;
        }
        cJSON_AddStringToObject(t, "id", (const char *)sqlite3_column_text(s, 0));
        cJSON_AddNumberToObject(t, "created_at", sqlite3_column_double(s, 1));
        cJSON_AddNumberToObject(t, "revoked_at", sqlite3_column_double(s, 2));
    }
    sqlite3_finalize(s);
    if (step != SQLITE_DONE) {
        cJSON_Delete(arr);
        anvil_fail("state database: cannot list tokens");
        return NULL;
    }
    return arr;
}

cJSON *anvil_auth_users_json(anvil_store *st) {
    cJSON *o = cJSON_CreateObject(), *arr = o ? cJSON_AddArrayToObject(o, "users") : NULL;
    pthread_mutex_lock(&st->lock);
    sqlite3_stmt *s = arr ? prepare(st, "SELECT name, admin, created_at FROM users ORDER BY name") : NULL;
    int step = SQLITE_ERROR;
    while (s && (step = sqlite3_step(s)) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(s, 0);
        cJSON *u = cJSON_CreateObject();
        cJSON *roles = column_array(st, "SELECT role FROM grants WHERE user = ?1 ORDER BY role", name);
        cJSON *tokens = user_tokens(st, name);
        if (!u || !roles || !tokens || !cJSON_AddItemToArray(arr, u)) {
            cJSON_Delete(u);
            cJSON_Delete(roles);
            cJSON_Delete(tokens);
            step = SQLITE_ERROR;
            break;
        }
        cJSON_AddStringToObject(u, "name", name);
        cJSON_AddBoolToObject(u, "admin", sqlite3_column_int(s, 1) != 0);
        cJSON_AddNumberToObject(u, "created_at", sqlite3_column_double(s, 2));
        cJSON_AddItemToObject(u, "roles", roles);
        cJSON_AddItemToObject(u, "tokens", tokens);
    }
    sqlite3_finalize(s);
    pthread_mutex_unlock(&st->lock);
    if (step != SQLITE_DONE) {
        cJSON_Delete(o);
        anvil_fail("state database: cannot list users");
        return NULL;
    }
    return o;
}

static int add_role(anvil_store *st, const anvil_role *role, const char *policy, const anvil_audit_entry *audit) {
    int rc = exists(st, "SELECT 1 FROM roles WHERE name = ?1", role->name);
    if (rc) return rc;
    sqlite3_stmt *s = prepare(st, "INSERT INTO roles (name, policy, created_at) VALUES (?1, ?2, ?3)");
    if (!s) return -1;
    sqlite3_bind_text(s, 1, role->name, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, policy, -1, SQLITE_STATIC);
    sqlite3_bind_double(s, 3, anvil_store_now());
    rc = sqlite3_step(s);
    sqlite3_finalize(s);
    return rc == SQLITE_DONE ? anvil_audit_insert(st, audit) : anvil_store_db_fail(st, "roles");
}

int anvil_auth_add_role(anvil_store *st, const anvil_role *role, const anvil_audit_entry *audit) {
    cJSON *j = anvil_role_to_json(role);
    char *policy = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    if (!policy) return anvil_fail("out of memory");
    int rc;
    IN_TRANSACTION(st, rc, rc = add_role(st, role, policy, audit));
    free(policy);
    return rc;
}

static int grant(anvil_store *st, const char *role, const char *user, const anvil_audit_entry *audit) {
    int rc = exists(st, "SELECT 1 FROM roles WHERE name = ?1", role);
    if (rc <= 0) return rc < 0 ? -1 : 1;
    rc = exists(st, "SELECT 1 FROM users WHERE name = ?1", user);
    if (rc <= 0) return rc < 0 ? -1 : 2;
    sqlite3_stmt *s = prepare(st, "INSERT OR IGNORE INTO grants (role, user, granted_at) VALUES (?1, ?2, ?3)");
    if (!s) return -1;
    sqlite3_bind_text(s, 1, role, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, user, -1, SQLITE_STATIC);
    sqlite3_bind_double(s, 3, anvil_store_now());
    rc = sqlite3_step(s);
    sqlite3_finalize(s);
    return rc == SQLITE_DONE ? anvil_audit_insert(st, audit) : anvil_store_db_fail(st, "grants");
}

int anvil_auth_grant(anvil_store *st, const char *role, const char *user, const anvil_audit_entry *audit) {
    int rc;
    IN_TRANSACTION(st, rc, rc = grant(st, role, user, audit));
    return rc;
}

int anvil_auth_get_role(anvil_store *st, const char *name, const char *user, anvil_role *role) {
    pthread_mutex_lock(&st->lock);
    sqlite3_stmt *s = prepare(st, "SELECT policy FROM roles WHERE name = ?1 AND (?2 IS NULL OR EXISTS"
                                  " (SELECT 1 FROM grants WHERE role = ?1 AND user = ?2))");
    int rc = -1;
    if (s) {
        sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
        if (user) sqlite3_bind_text(s, 2, user, -1, SQLITE_STATIC);
        int step = sqlite3_step(s);
        if (step == SQLITE_ROW)
            rc = anvil_role_parse((const char *)sqlite3_column_text(s, 0), (size_t)sqlite3_column_bytes(s, 0), role);
        else if (step == SQLITE_DONE) rc = 1;
        else anvil_store_db_fail(st, "roles");
    }
    sqlite3_finalize(s);
    pthread_mutex_unlock(&st->lock);
    return rc;
}

int anvil_auth_user_roles(anvil_store *st, const char *user, char **names, int *n) {
    pthread_mutex_lock(&st->lock);
    cJSON *arr = column_array(st, "SELECT role FROM grants WHERE user = ?1 ORDER BY role", user);
    pthread_mutex_unlock(&st->lock);
    if (!arr) return -1;
    *n = cJSON_GetArraySize(arr);
    size_t len = 1;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) len += strlen(e->valuestring) + 2;
    *names = malloc(len);
    if (*names) {
        (*names)[0] = 0;
        cJSON_ArrayForEach(e, arr) {
            if ((*names)[0]) strcat(*names, ", ");
            strcat(*names, e->valuestring);
        }
    }
    cJSON_Delete(arr);
    return *names ? 0 : anvil_fail("out of memory");
}

cJSON *anvil_auth_roles_json(anvil_store *st, const char *user) {
    cJSON *o = cJSON_CreateObject(), *arr = o ? cJSON_AddArrayToObject(o, "roles") : NULL;
    pthread_mutex_lock(&st->lock);
    sqlite3_stmt *s = arr ? prepare(st, "SELECT name, policy FROM roles WHERE ?1 IS NULL OR EXISTS (SELECT 1 FROM"
                                        " grants WHERE role = roles.name AND user = ?1) ORDER BY name")
                          : NULL;
    int step = SQLITE_ERROR;
    if (s && user) sqlite3_bind_text(s, 1, user, -1, SQLITE_STATIC);
    while (s && (step = sqlite3_step(s)) == SQLITE_ROW) {
        cJSON *r = anvil_json_parse_str((const char *)sqlite3_column_text(s, 1));
        /* A user sees the role's grant to them, not who else holds it. */
        cJSON *users = user ? cJSON_CreateStringArray(&user, 1)
                            : column_array(st, "SELECT user FROM grants WHERE role = ?1 ORDER BY user",
                                           (const char *)sqlite3_column_text(s, 0));
        if (!r || !users || !cJSON_AddItemToArray(arr, r)) {
            cJSON_Delete(r);
            cJSON_Delete(users);
            step = SQLITE_ERROR;
            break;
        }
        cJSON_AddItemToObject(r, "users", users);
    }
    sqlite3_finalize(s);
    pthread_mutex_unlock(&st->lock);
    if (step != SQLITE_DONE) {
        cJSON_Delete(o);
        anvil_fail("state database: cannot list roles");
        return NULL;
    }
    return o;
}

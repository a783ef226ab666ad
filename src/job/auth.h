/* Principals of the job service: users, their API tokens, and the roles granted to them.
 *
 * A token is `anv_<id>_<secret>`: id 16 hex digits, its public name (shown in listings and the
 * audit trail, and what revoking takes), secret 64 hex digits (32 bytes from libsodium's
 * randombytes). It is shown once, when made; the database keeps only the BLAKE2b-256 hash of the
 * whole token (see auth.c for why a fast hash). Users, tokens, roles and grants are tables of the
 * state database; every change also appends its audit entry, in the same transaction. */
#ifndef ANVIL_JOB_AUTH_H
#define ANVIL_JOB_AUTH_H

#include <stdbool.h>

#include <cjson/cJSON.h>

#include "job/audit.h"
#include "job/policy.h"
#include "job/store.h"

#define ANVIL_TOKEN_ID_LEN 16
/* "anv_" id "_" secret, and the NUL. */
#define ANVIL_TOKEN_SIZE (4 + ANVIL_TOKEN_ID_LEN + 1 + 64 + 1)

/* Who made a request. */
typedef struct {
    char user[65];
    char token_id[ANVIL_TOKEN_ID_LEN + 1];
    bool admin;
} anvil_principal;

/* Checks an Authorization header (NULL: none): 0 with *who filled; 1 when refused, with why (one
 * line for the audit trail, never the token) and who->token_id set when the token was well formed;
 * -1 on error. */
int anvil_auth_check(anvil_store *st, const char *authorization, anvil_principal *who, char *why, size_t cap);

/* The number of users. */
int anvil_auth_user_count(anvil_store *st, int *n);

/* Adds a user (admin or not) with a first token, written into token. 0, 1 when the user exists,
 * -1 on error. The audit entry is recorded with the new token's ID as its detail. */
int anvil_auth_add_user(anvil_store *st, const char *name, bool admin, const anvil_audit_entry *audit,
                        char token[ANVIL_TOKEN_SIZE]);
/* The first admin (`anvil serve --init`): 0, 1 when the state has users already, -1. */
int anvil_auth_init(anvil_store *st, const char *name, char token[ANVIL_TOKEN_SIZE]);
/* A new token for user. 0, 1 when there is no such user, -1. */
int anvil_auth_add_token(anvil_store *st, const char *user, const anvil_audit_entry *audit,
                         char token[ANVIL_TOKEN_SIZE]);
/* Revokes the token named id. 0 with *user set (malloc'd), 1 when there is no such token, 2 when
 * it was revoked already, 3 when it is the last live token of any admin (which would lock every
 * admin out), -1. The audit entry is recorded with the token's user as its detail when it has none. */
int anvil_auth_revoke(anvil_store *st, const char *id, const anvil_audit_entry *audit, char **user);
/* {"users": [{"name", "admin", "created_at", "roles": [...], "tokens": [{"id", "created_at",
 * "revoked_at"}]}]}, by name. */
cJSON *anvil_auth_users_json(anvil_store *st);

/* Stores a role. 0, 1 when a role of that name exists, -1. */
int anvil_auth_add_role(anvil_store *st, const anvil_role *role, const anvil_audit_entry *audit);
/* Grants role to user. 0 (also when granted already), 1 no such role, 2 no such user, -1. */
int anvil_auth_grant(anvil_store *st, const char *role, const char *user, const anvil_audit_entry *audit);
/* The role named name, when granted to user (NULL: whoever): 0, 1 when there is none or it is
 * not granted, -1. */
int anvil_auth_get_role(anvil_store *st, const char *name, const char *user, anvil_role *role);
/* The names of the roles granted to user, by name, malloc'd ("a, b"), and how many. */
int anvil_auth_user_roles(anvil_store *st, const char *user, char **names, int *n);
/* {"roles": [role JSON + "users": [...]]}, by name: every role with every grantee; when user is not
 * NULL, only the roles granted to user, each with user alone as its "users". */
cJSON *anvil_auth_roles_json(anvil_store *st, const char *user);

#endif

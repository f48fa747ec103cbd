-- Groups, app tokens and the credential change feed of the built-in identity store
-- (storage-system). Keep in step with ../postgres/0003_identity.sql.

CREATE TABLE groups (
    id           TEXT PRIMARY KEY NOT NULL,
    display_name TEXT NOT NULL,
    description  TEXT NOT NULL DEFAULT '',
    created      INTEGER NOT NULL                 -- ns since the epoch
);
CREATE UNIQUE INDEX groups_display_name ON groups (display_name);

-- Deleting a group or a user removes the memberships with it.
CREATE TABLE group_members (
    group_id TEXT NOT NULL REFERENCES groups (id) ON DELETE CASCADE,
    user_id  TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    PRIMARY KEY (group_id, user_id)
);
CREATE INDEX group_members_user ON group_members (user_id);

-- App tokens: passwords for sync clients, stored only as a SHA-256 (see storage-system).
CREATE TABLE app_tokens (
    id      TEXT PRIMARY KEY NOT NULL,
    user_id TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    hash    TEXT NOT NULL,                        -- hex SHA-256 of the token
    label   TEXT NOT NULL DEFAULT '',
    created INTEGER NOT NULL,                     -- ns since the epoch
    expires INTEGER NOT NULL                      -- ns since the epoch; 0 = never
);
CREATE INDEX app_tokens_user ON app_tokens (user_id);

-- One row: bumped in the same transaction as every change that must end cached logins
-- (password, deletion, app-token revocation, group membership). Its row lock also orders
-- those transactions, so generations commit in order on PostgreSQL too.
CREATE TABLE credentials_generation (
    id  INTEGER PRIMARY KEY NOT NULL,
    gen INTEGER NOT NULL
);
INSERT INTO credentials_generation (id, gen) VALUES (1, 0);

-- Which user each generation was about; storage-system polls this to tell proxies, and
-- prunes rows older than a few minutes.
CREATE TABLE credential_events (
    gen     INTEGER PRIMARY KEY NOT NULL,
    user_id TEXT NOT NULL,
    at      INTEGER NOT NULL                      -- ns since the epoch
);

-- The users half of the pre-split 0002_users_locks (its locks half is version 2 of the files set,
-- in arca-store-files); the version is kept so that a database made before the split adopts it
-- (see arca_store::schema).

-- Users of the built-in identity store (storage-system). Passwords are argon2id PHC strings.
CREATE TABLE users (
    id                 TEXT PRIMARY KEY NOT NULL,
    username           TEXT NOT NULL,
    display_name       TEXT NOT NULL,
    mail               TEXT NOT NULL DEFAULT '',
    admin              INTEGER NOT NULL DEFAULT 0,     -- 0/1: no bool on SQLite through Any
    password_hash      TEXT NOT NULL,
    credential_version INTEGER NOT NULL DEFAULT 1,     -- bumped on every password change
    created            INTEGER NOT NULL                -- ns since the epoch
);
CREATE UNIQUE INDEX users_username ON users (username);

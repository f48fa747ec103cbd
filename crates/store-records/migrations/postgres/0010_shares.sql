-- Share records of the sharing service (kept by storage-system). Keep in step with
-- ../sqlite/0010_shares.sql. The sharing service owns their meaning; this is storage only.

-- One row per user share, group share or public link. Ids are the public ids of the shared
-- node and its space (`PROVIDER$SPACE!NODE`), since the node lives in another service.
CREATE TABLE shares (
    id            TEXT PRIMARY KEY NOT NULL,
    share_type    BIGINT NOT NULL,             -- 0 user, 1 group, 3 public link (OCS)
    space_id      TEXT NOT NULL,
    node_id       TEXT NOT NULL,
    is_dir        BIGINT NOT NULL,             -- 0/1
    target        TEXT NOT NULL DEFAULT '',     -- the node's name when shared
    owner_id      TEXT NOT NULL,                -- the space's owner
    creator_id    TEXT NOT NULL,                -- the owner or a resharer
    grantee_id    TEXT NOT NULL DEFAULT '',     -- user or group id; '' for links
    permissions   BIGINT NOT NULL,             -- OCS bits
    token         TEXT,                         -- links only
    password_hash TEXT NOT NULL DEFAULT '',     -- argon2id PHC string; '' = none
    expires       BIGINT NOT NULL DEFAULT 0,   -- unix seconds; 0 = never
    name          TEXT NOT NULL DEFAULT '',
    created       BIGINT NOT NULL              -- unix seconds
);
CREATE UNIQUE INDEX shares_token ON shares (token) WHERE token IS NOT NULL;
-- The enforcement lookup: a caller's grants in one space.
CREATE INDEX shares_space_grantee ON shares (space_id, grantee_id);
CREATE INDEX shares_grantee ON shares (grantee_id);
CREATE INDEX shares_creator ON shares (creator_id);
CREATE INDEX shares_owner ON shares (owner_id);
CREATE INDEX shares_node ON shares (node_id);

-- What one recipient did with a user or group share (accepted, declined). No row means the
-- sharing service's default (`sharing.auto_accept`). Goes with its share.
CREATE TABLE share_states (
    share_id TEXT NOT NULL REFERENCES shares (id) ON DELETE CASCADE,
    user_id  TEXT NOT NULL,
    state    BIGINT NOT NULL,                  -- 0 accepted, 1 pending, 2 declined
    PRIMARY KEY (share_id, user_id)
);
CREATE INDEX share_states_user ON share_states (user_id);

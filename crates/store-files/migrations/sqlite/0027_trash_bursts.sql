-- Who removed what through which client, and bursts of removals. Keep in step with
-- ../postgres/0027_trash_bursts.sql.
--
-- A burst is one actor removing through one client program, each removal within the burst
-- window of the one before: a client's mass delete (a wiped folder synced, a mistaken sync
-- root). It counts items and the files inside them; past a threshold it is flagged, so its
-- owner can find it and restore exactly it in one call.
ALTER TABLE trash ADD COLUMN deleted_via TEXT NOT NULL DEFAULT '';  -- the client (User-Agent)

CREATE TABLE trash_bursts (
    id       TEXT PRIMARY KEY NOT NULL,
    space_id TEXT NOT NULL REFERENCES spaces (id) ON DELETE CASCADE,
    actor    TEXT NOT NULL,
    client   TEXT NOT NULL,
    first_at INTEGER NOT NULL,       -- ns since the epoch: the first and the latest removal
    last_at  INTEGER NOT NULL,
    items    INTEGER NOT NULL,
    files    INTEGER NOT NULL,       -- files removed, counting those inside removed folders
    flagged  INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX trash_bursts_open ON trash_bursts (space_id, actor, client, last_at);

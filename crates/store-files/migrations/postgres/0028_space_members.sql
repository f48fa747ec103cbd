-- Project spaces' members and disabled spaces. Keep in step with ../sqlite/0028_space_members.sql.
--
-- A member is a user or a group with a role: oCIS's Manager, Space Editor and Space Viewer.
-- Graph names a membership by its member (`u:{user id}`, `g:{group id}`), so the member is the
-- key within a space.
CREATE TABLE space_members (
    space_id TEXT NOT NULL REFERENCES spaces (id) ON DELETE CASCADE,
    kind     TEXT NOT NULL,     -- 'user' | 'group'
    member   TEXT NOT NULL,     -- the user's or the group's id
    role     TEXT NOT NULL,     -- 'manager' | 'editor' | 'viewer'
    created  BIGINT NOT NULL,  -- ns since the epoch
    PRIMARY KEY (space_id, kind, member)
);
-- The spaces a user, or one of their groups, is in: every space listing of a member.
CREATE INDEX space_members_member ON space_members (member);

-- A disabled project space (Graph's DELETE without Purge: its members lose it at once, a
-- manager or an admin restores or purges it): when, ns since the epoch; NULL = in use.
ALTER TABLE spaces ADD COLUMN disabled BIGINT;

-- The project spaces made before memberships keep their creator, as their manager.
INSERT INTO space_members (space_id, kind, member, role, created)
SELECT id, 'user', owner, 'manager', created FROM spaces WHERE kind = 'project';

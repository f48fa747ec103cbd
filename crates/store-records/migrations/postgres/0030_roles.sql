-- A user's role beside admin (graph appRoleAssignments): a space admin creates project spaces
-- and manages every one of them. Keep in step with ../sqlite/0030_roles.sql.
ALTER TABLE users ADD COLUMN space_admin BIGINT NOT NULL DEFAULT 0;  -- 0/1, as admin

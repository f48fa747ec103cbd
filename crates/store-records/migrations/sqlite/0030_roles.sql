-- A user's role beside admin (graph appRoleAssignments): a space admin creates project spaces
-- and manages every one of them. Keep in step with ../postgres/0030_roles.sql.
ALTER TABLE users ADD COLUMN space_admin INTEGER NOT NULL DEFAULT 0;  -- 0/1, as admin

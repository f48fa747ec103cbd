-- `placing` is a reserved word in PostgreSQL, so the column is `place_claim` in both dialects
-- (PostgreSQL's 0025 names it so; SQLite databases that applied 0025 rename it here).
ALTER TABLE uploads RENAME COLUMN placing TO place_claim;

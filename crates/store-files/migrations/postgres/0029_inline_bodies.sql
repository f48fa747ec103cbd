-- Small file contents kept in the metadata database. Keep in step with
-- ../sqlite/0029_inline_bodies.sql, which says why.
ALTER TABLE blobs ADD COLUMN data BYTEA;

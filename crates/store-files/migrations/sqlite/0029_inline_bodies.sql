-- Small file contents kept in the metadata database. Keep in step with
-- ../postgres/0029_inline_bodies.sql.
--
-- A blob whose id starts with 'i' has its bytes here, written in the same transaction as the
-- node that points at it (one WAL sync covers a whole batch's data and metadata; no file is
-- created, synced or renamed); every other blob's bytes are in the blob store and `data` is NULL.
-- Deleting the row frees the bytes, so the collector and the trash treat both kinds alike.
ALTER TABLE blobs ADD COLUMN data BLOB;

-- Where each replica's tunnel ingress is reached (its advertised URL):
-- a Gateway's CONNECT for a cluster whose session another replica holds
-- is forwarded there. NULL: the replica runs no ingress.
ALTER TABLE hub_replicas ADD COLUMN tunnel_url TEXT;

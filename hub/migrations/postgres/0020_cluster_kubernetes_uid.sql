-- The execution cluster's identity as its spoke read it at enrolment: the
-- UID of its kube-system namespace. Two enrolled names with one UID are
-- one Kubernetes cluster shared by two spokes, which is unsupported and
-- refused unless the enrolment was forced. NULL: enrolled before this
-- existed, or by a spoke that did not say.
ALTER TABLE clusters ADD COLUMN kubernetes_uid TEXT;

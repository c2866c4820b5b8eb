"""Federation (LavinMQ's docs/federation.md): `federation-upstream` and
`federation-upstream-set` parameters, applied to exchanges and queues by
the policy keys federation-upstream and federation-upstream-set. upstream:
the definitions; link: exchange and queue links; manager: a vhost's links,
kept in step with its policies."""

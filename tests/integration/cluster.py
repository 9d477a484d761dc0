"""Several gateway nodes on one PostgreSQL store for integration tests: count Stacks
(tests/integration/stack.py), each its own mock upstream, HAProxy and agent, named
n1..nN, sharing one database, one key-hashing secret and the demo key seeded by the
first. Every process is stopped by PID on every exit path (close, or the with-block)."""
from stack import Stack


class Cluster:
    def __init__(self, tmp, pg, url, count, agent_args=(), agent_env=None):
        self.nodes = []
        for i in range(1, count + 1):
            d = tmp / f"n{i}"
            d.mkdir()
            self.nodes.append(Stack(d, store="postgres", pg=pg, url=url, node=f"n{i}",
                                    agent_args=agent_args, agent_env=agent_env))
        for n in self.nodes[1:]:
            n.secret = self.nodes[0].secret   # the one key-hashing secret of every node

    def start(self):
        first = self.nodes[0]
        first.start()
        for n in self.nodes[1:]:
            n.key = first.key
            n.start(seed=False)
        return self

    def close(self):
        for n in self.nodes:
            n.close()

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc):
        self.close()

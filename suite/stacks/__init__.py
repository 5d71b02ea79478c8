"""Where a framework stack comes from: the locks and local stacks, where their packages come from
(wheelhouse), and the container images built from the same locks."""

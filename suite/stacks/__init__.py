"""Where a framework stack comes from: the stack and its flavours as containers/<stack>/ describes them
(recipes), its locks (locks) and the interpreters they cover (lock_targets), the local stacks built from them
(install), where their packages come from (wheelhouse), and the container images built from the same locks
(images, base_images)."""

"""The CPU manager: the static policy, its options, the takeByTopology allocators (pure functions)
and the assignment state the policy alone writes."""

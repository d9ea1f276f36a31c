"""The topology manager: NUMA hints, the CPU hint provider and the merge of all providers' hints
under the configured policy and scope."""

"""One scenario runner for the demo, the side-by-side benchmark and the chaos run.

All three need the same thing: the local stack, consumer processes as pods, a producer at a
bounded rate, a record of every processed event, and a way to tell when the partitions are
balanced again after something happened. The balancing system under test is pluggable
(`operatorsystems.OursSystem`: the operator and ``ehb consume`` pods;
`sdkbalancing.SdkSystem`: the SDK's EventProcessorClient workers), so that both face exactly
the same steps; `systems` says what "balanced" means for both.
"""

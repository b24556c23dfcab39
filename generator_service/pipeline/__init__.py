"""One campaign as a pipeline of four stages, each a module with one job, each testable alone.

plan      ask the strategy for a batch of typed test cases and store them as asked (plan.py); rebuild a
          strategy from the stored batches, for a resumed campaign and for ListArchive (``rebuild_strategy``)
execute   run a batch's cases as sharded RunEpisodes streams over the simulator endpoints; an invalid input
          comes back as a per-case result naming its violations (execute.py)
judge     Evaluate the episodes on the oracle and take the majority verdict over repetitions; an invalid input
          becomes an invalid execution without an oracle call (judge.py)
record    store the executions, count them, publish progress, then tell the strategy in asking order
          (record.py)

generator_service/campaign.py wires them: budgets, stop reasons, retries and cancellation.
"""

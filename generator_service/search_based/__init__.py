"""Search-based testing of RL ("Search-Based Testing of Reinforcement Learning", IJCAI-ECAI 2022)."""

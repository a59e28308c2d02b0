"""The reward branch's shared experiment: reward heads, Bradley-Terry training, reward signals, PPO.

Chapters PT-REWARD-MODEL, PT-REWARD-SIGNAL and 16 (PPO) share it. Each module has one job:

    masks            the last valid position of each row of a 0/1 mask (where a sequence ends)
    signals          per-token KL, token-level rewards, GAE and whitening over masked response tokens
    verl_reference   verl 0.9.1's own KL penalty, GAE, policy and value losses, called on given tensors
"""

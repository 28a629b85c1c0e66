import torch

def make():
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3))

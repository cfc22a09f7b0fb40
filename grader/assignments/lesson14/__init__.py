"""Lesson 14, the capstone speedrun: the learner's named changes to the naive CIFAR recipe, graded on
time to target against the naive recipe, each of its three largest gains measured by leaving it out."""

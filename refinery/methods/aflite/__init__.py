"""AFLite (Le Bras et al. 2020): filter the rows a cheap linear model predicts too easily."""

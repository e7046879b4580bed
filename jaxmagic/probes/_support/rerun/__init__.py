"""Running the user's code again (a NaN's producer search, a fix's trial): what it may change, whether it ran."""

"""The book's figures: one style for every chapter, and each chapter's drawing functions.

This package is the book's, not the optimizer library's: ``import isolab`` does not load
it (it needs Matplotlib). :mod:`isolab.book.figures.style` holds what every figure shares (font
sizes, line widths, one colour, marker and line style per optimizer, colorbars, direct
labels); ``isolab.book.figures.chNN`` holds the figures and explorables of chapter NN, so that
a chapter's page shows one line where the figure goes and the reader sees the picture,
not the plotting code.
"""

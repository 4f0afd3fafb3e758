#!/bin/bash
pwd > where.txt
echo here > answer.txt

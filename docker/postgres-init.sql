-- A second database in the same PostgreSQL server: the costaware ledger (budgets, reservations, costs).
CREATE DATABASE costaware;
